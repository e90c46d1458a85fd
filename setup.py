"""Only the compiled P12 loops live here; everything else is in pyproject.toml.

``optional``: without a C compiler the install still succeeds and the codec runs its numpy
fallback (``engine.codecs.p12.BACKEND`` says which; a test fails where a compiler exists
but the module was not built).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "engine.codecs._p12c",
            ["engine/codecs/_p12c.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
