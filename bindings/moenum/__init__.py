"""moenum: numerics harness for Mixture-of-Experts grouped linear layers.

    scs = moenum.load_scenarios("scenarios/smoke.yaml")
    res = moenum.run(scs[0], out="results/")
    res.errors                      # pandas DataFrame
    camp = moenum.run_campaign("scenarios/padding.yaml", out="results/", jobs=2, resume=True)
"""
from . import _core, mx, tc
from .campaign import Campaign, run_campaign
from .disposition import Disposition
from .errors import MoenumError, ScenarioError
from .external import ExpertsSpec
from .result import RunResult, open_results
from .runner import run
from .scenario import Scenario, from_dict, load_scenarios

__version__ = _core.__version__

__all__ = ["Campaign", "Disposition", "ExpertsSpec", "MoenumError", "RunResult", "Scenario", "ScenarioError", "from_dict",
           "load_scenarios", "mx", "open_results", "run", "run_campaign", "tc", "__version__"]
