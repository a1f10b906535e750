"""The suite's preparation phase: every tool, package and image its tests use, built or fetched
once before the first test (runner.py), outside every test's time limit; the tests only look them
up (gate.py). steps.py lists the steps, makers.py says how each is made.

`python -m tests.preparation [STEP ...]` runs the steps by hand (all of them by default), as the
test command does before its first test.
"""
