"""Fair linear models of [FR] (Scutari, Panero, Proissl) and their baselines.

- :class:`FRRM` - fair ridge regression: ridge penalty on the sensitive attributes chosen so
  that their share of the explained variance ``R^2_S`` is at most ``r``;
- :class:`FGRRM` - its GLM version (binomial, Poisson) with the deviance-ratio bound;
- :class:`NCLM` - Komiyama et al. (2018), the convex relaxation solved with Clarabel;
- :class:`ZLM`, :class:`ZLRM` - Zafar et al. covariance-bounded linear/logistic regression
  through :class:`solvers.StochasticSQP` and :class:`fairopt.constraints.Covariance`.

All follow scikit-learn conventions with the sensitive attributes passed by keyword:
``model.fit(X, y, sensitive=S)``, ``model.predict(X, sensitive=S)``.
"""

from fairopt.linear._common import r2_sensitive
from fairopt.linear.fgrrm import FGRRM, deviance_ratio
from fairopt.linear.frrm import FRRM
from fairopt.linear.nclm import NCLM
from fairopt.linear.zafar import ZLM, ZLRM

__all__ = ["FRRM", "FGRRM", "NCLM", "ZLM", "ZLRM", "r2_sensitive", "deviance_ratio"]
