"""Turning sections into files: markdown tables (`markdown`), the figures (`canvas` and one module per
kind of figure: `ties`, `scores`, `intervals`, `curves`) and the writer of REPORT.md, its CSVs and
figures (`writer`)."""
