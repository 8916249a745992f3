"""DuckDB persistence: every SQL statement of the project lives here."""
