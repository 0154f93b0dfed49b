"""The report's sections, one module each, in the order a reader meets them: header, findings,
provenance, ranking, heldout, at_k, coverage, trained, significance (every test across seeds), ties, persistence,
group_size, equal_budget, health, examples, jobs. Each has a `section(...)` function returning a `Section`
(`analysis.sections.section`); `analysis.report` writes what they return, and `analysis.parts` declares what
those that read each other need."""
