"""A user's own hbir passes, packaged separately from hbir."""
