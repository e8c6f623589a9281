"""Runners execute one benchmark run and return a RunResult.

The contract they implement is :mod:`ablate.backend.domain.runner`.
"""
