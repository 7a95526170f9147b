"""Benchmark data sets of the fairness literature (read locally, row counts verified).

>>> from fairopt import datasets
>>> datasets.available()
['adult', 'dutch', 'law', 'acsincome', 'communities', 'compas', 'pg15training']
>>> data = datasets.load("adult")          # UCI Adult is embedded (CC BY 4.0)

The other data sets are not redistributed with fairopt (licences); put their files in a
data directory: the ``data_dir`` argument, ``$FAIROPT_DATA`` or :func:`user_data_dir`.
"""

from fairopt.datasets._paths import ENV_VAR, user_data_dir
from fairopt.datasets.loaders import available, describe, load, load_frame, locate

__all__ = ["load", "load_frame", "available", "describe", "locate", "user_data_dir", "ENV_VAR"]
