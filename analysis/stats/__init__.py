"""Statistics that know nothing of runs: binomial facts (`binomial`), bootstrap and t intervals
(`intervals`), exact tests across seeds and Holm (`tests`), arms compared across seeds (`seeds`), and
the pass@k / cons@k estimators (`at_k`)."""
