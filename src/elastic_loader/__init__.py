"""elastic-loader: elastic, resumable streaming data loading for PyTorch over LanceDB.

The executable specification lives in :mod:`elastic_loader.spec`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
