"""The optimized pipeline (private). Import the public names from :mod:`elastic_loader`."""
