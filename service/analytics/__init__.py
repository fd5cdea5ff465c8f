"""PySpark jobs reading the live route tables from Redis."""
