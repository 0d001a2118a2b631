"""An engine's lifecycle: supported versions, the hashed lock and its venvs, upgrades across a
cache group, drain, prerequisites, where checks reach it.
"""
