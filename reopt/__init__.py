"""reopt: a declarative, incremental query re-optimizer.

The public API is :mod:`reopt.api` (``from reopt.api import Optimizer``); the implementation is
in ``reopt.costmodel`` (statistics, estimation, cost models), ``reopt.optimizers`` (procedural
reference optimizers), ``reopt.evaluator`` (the datalog evaluator) and ``reopt.incremental``
(re-optimization sessions).
"""

__version__ = "0.1.0"
