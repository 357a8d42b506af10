"""The one compiled module, ``elastic_loader._pipeline._native`` (packing's document copy and
``doc_ids``; docs/PIPELINE.md, "Copying documents"); everything else is in pyproject.toml. The
extension is optional: an install without a C compiler still works, and the pipeline then does the
same with numpy."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "elastic_loader._pipeline._native",
            sources=["src/elastic_loader/_pipeline/_native.c"],
            optional=True,
        )
    ]
)
