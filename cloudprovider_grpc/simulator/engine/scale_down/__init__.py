"""Scale-down, read top-down: the phase (`phase.py`: group options, cooldowns, the DeleteNodes
calls) asks the planner (`planner.py`: eligibility, drainability, rescheduling, the unneeded
timers) which nodes may go now."""
