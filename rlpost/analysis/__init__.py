"""Between runs: statistics, sweep tables, comparisons across seeds, plots, the HTML report, the value-gradient
signal, rubric memory.
"""
