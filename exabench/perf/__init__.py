"""Performance models: the log-linear model of a results table, the alpha-beta communication model
and its link parameters, the local scaling check, validation against published figures and
whole-machine projections (always labelled PROJECTED)."""
