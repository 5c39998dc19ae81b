"""Packaging beside pyproject.toml: the kernel families (templates/) and the shape sets (shapes/) live at the top of
the repository but travel inside the package, as ``evo/templates`` and ``evo/shape_sets``, so that a wheel or a
non-editable ``pip install .`` works without the repository (evo.families and evo.shapes look there first)."""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["evo", "evo.*", "bench", "bench.*"]) + ["evo.templates", "evo.shape_sets"],
    package_dir={"evo.templates": "templates", "evo.shape_sets": "shapes"},
    package_data={
        "evo": ["*.yaml", "prompts/*.md"],
        "evo.templates": ["*/*.yaml", "*/*.cu", "*/*.cuh", "*/*.h", "*/*.md"],
        "evo.shape_sets": ["*.yaml"],
    },
)
