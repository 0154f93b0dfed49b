"""The numbers the sections report, each a function of the loaded tables that returns a table: ties
and their prediction, what each sample bought (`spend`), held-out scores and arm comparisons, pass@k
curves, tie persistence, group size, coverage after RL, health curves, rankings."""
