"""Packages of the wheel: each top-level folder of the repository, installed under ``ablate.``.

Metadata lives in pyproject.toml; only the package list is computed here, so a new sub-package is
never left out of the wheel.
"""

from setuptools import find_packages, setup

FOLDERS = ("backend", "workers", "migrations", "web", "examples")

packages = []
for folder in FOLDERS:
    packages.append(f"ablate.{folder}")
    packages += [f"ablate.{folder}.{sub}" for sub in find_packages(folder)]

setup(packages=packages)
