"""Fuzzing ``fj.Program.parse`` and everything after it (issues 7 and 13).

- :mod:`fuzz.seeds` builds the seed programs (a training program, sub-blocks, LoD variables,
  every attribute kind, and one written by Paddle 2.6.2);
- :mod:`fuzz.loose` is the ``ProgramDesc`` schema with every string as bytes and every enum as
  an integer, so that structure-aware mutations can write what the real schema forbids;
- :mod:`fuzz.mutate` makes mutant ``i`` of a seed, reproducibly from ``(seed name, i)``;
- :mod:`fuzz.harness` runs mutants in a pool of worker processes (crash, hang and memory
  checks) and counts the outcomes; ``python -m fuzz.harness SEED INDEX`` (from ``tests/``)
  replays one mutant in this process and prints its traceback.
"""
