"""The books and the rules: who holds which GPU, who may get how many, when they go back.

Standard library only (an import-linter contract keeps it so): everything here
is plain data and pure functions, tested in milliseconds.
"""
