"""Prefect tasks: thin wrappers that call ``apollo`` and add retries, logging and caching policy."""
