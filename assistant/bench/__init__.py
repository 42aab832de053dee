"""The tools built on the engine, not part of it: the benchmark and its data, the attribution
metric, the sandbox that runs the fix task's tests, and the calibration search. The engine never
imports them; the commands in `assistant/cli/` do."""
