"""The one compiled module, ``elastic_loader._pipeline._gather`` (docs/PIPELINE.md, "Copying
documents"); everything else is in pyproject.toml. The extension is optional: an install without a
C compiler still works, and the pipeline then copies documents with numpy."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "elastic_loader._pipeline._gather",
            sources=["src/elastic_loader/_pipeline/_gather.c"],
            optional=True,
        )
    ]
)
