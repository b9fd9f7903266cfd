"""The operator-db REST API (FastAPI), a thin shell over the library."""
