"""Reports by day: the day-bucket report (``daily``) that ``edge report --by day`` prints,
and the operator page ``GET /reports`` with its charts, built from the same rows."""
