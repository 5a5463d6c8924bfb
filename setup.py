from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent

setup(
    name="tb-syncfinder",
    version="0.1.0",
    description="Sync Advisor: find host-device synchronizations in PyTorch profiler traces, "
    "with their cost, source line and fix, in TensorBoard and on the command line.",
    long_description=(here / "README.md").read_text(encoding="utf-8")
    if (here / "README.md").exists()
    else "",
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",  # torch 2.13 needs 3.10; the code uses 3.10 APIs (bisect key=)
    packages=find_packages(include=["tb_syncfinder", "tb_syncfinder.*"]),
    package_data={
        "tb_syncfinder": ["py.typed", "static/*", "demo/*.py", "demo/traces/*"],
    },
    include_package_data=True,
    install_requires=[
        "tensorboard>=2.11",
        "torch-tb-profiler>=0.4",
        "werkzeug>=2.0",
        # Any torch: 2.13.0 (the CPU build these machines install from a file) satisfies it.
        "torch>=1.8",
        "numpy",
        # Typed decoding is ~3x faster than json.loads on a 54 MB trace (bench/bench_engine.py).
        # 0.18.0-0.18.3 crash the interpreter at import on Python 3.12, and 3.13 has no
        # wheel below 0.19 (a compatibility review, 2026-11-28).
        "msgspec>=0.18; python_version < '3.12'",
        "msgspec>=0.18.4; python_version == '3.12'",
        "msgspec>=0.19; python_version >= '3.13'",
    ],
    extras_require={
        # wheel: tests/test_packaging.py builds one (setuptools before 70.1 needs it).
        "test": [
            "pytest>=7",
            "pytest-timeout",
            # Pinned: a newer ruff formats or lints unchanged code differently, and CI checks both.
            "ruff==0.17.6",
            "playwright>=1.40",
            "jsonschema>=4",
            "wheel",
            # tests/test_notebook_cells.py runs a notebook in a real Jupyter kernel: the
            # name ipykernel gives a cell's code is what the engine looks notebooks up by.
            "ipykernel",
            "nbclient",
            "nbformat",
        ],
        # Past one machine: the per-trace analysis as Ray tasks (tb-syncfinder report --ray).
        "ray": ["ray>=2.10"],
    },
    entry_points={
        "console_scripts": ["tb-syncfinder = tb_syncfinder.cli:run"],
        "tensorboard_plugins": ["sync_advisor = tb_syncfinder.plugin:SyncAdvisorLoader"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
