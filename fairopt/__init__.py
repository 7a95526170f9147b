from fairopt.exceptions import FairnessWarning

__version__ = "0.1.0"
__all__ = ["FairnessWarning", "__version__"]
