"""The broker side: the reader library that follows the decision topic."""
