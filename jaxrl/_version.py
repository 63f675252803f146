"""The package's version, alone in a module so that any layer may read it without importing the package root."""

__version__ = "0.10.5"
