"""What is made from records: comparison tables, the frameworks table, kernel matrices, scaling
formulas, plots, acceptance verdicts and archives."""
