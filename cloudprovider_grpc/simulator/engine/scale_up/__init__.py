"""Scale-up, read top-down: the phase (`phase.py`: which pending pods CA acts on, the IncreaseSize
calls) hands the pods left over to the orchestrator (`orchestrator.py`: valid groups, limits,
balancing), which asks the binpacking estimator (`estimator.py`) how many nodes each group needs
and the expanders (`expanders.py`) which group to grow."""
