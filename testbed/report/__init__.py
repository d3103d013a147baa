"""Stage 6, the HTML/Markdown report."""
