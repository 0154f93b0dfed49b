"""Rule-based rewards: answer extraction and checking (rules), and scoring many completions within a
time budget in worker processes (scorer). Completions are untrusted text: never evaluated as code."""
