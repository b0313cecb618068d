"""Reporting: what a study's stores say, rendered for people.

`cem-ablate report` (`report.make_report`) reads a study back from MLflow
(`tracking.readback`), decides its comparisons with the study's own rule
(`study.verdicts`) and lays out the table, the markdown and the figures; the
per-section builders (`seed_report`, `width_report`, `gp_draws_report`) turn the
statistics of `analysis` into text. Nothing here trains, queues or fits anew: the
numbers are the study's, computed once (`study.summary`). Above `study` in the
layers because the report uses the study's verdict rule, pairing check and GP
floor; the coordinator's own publishing (`study.summary`, `study.plots`) stays in
`study`, which therefore imports nothing from here.
"""
