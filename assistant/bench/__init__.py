"""The tools built on the engine, not part of it: the benchmark (`plan.py` checks what to measure before
the model loads, `generators.py` runs the engine and the generators it is measured against, `run.py`
measures a plan record by record, `report.py` summarizes, draws and writes), its data and tasks
(`data.py`, `preserve.py`, `canitedit.py`), the measures of an edit (`done.py`, `attribution_quality.py`),
the sandbox that runs tests, and the calibration search. The engine never imports them; the commands
in `assistant/cli/` do."""
