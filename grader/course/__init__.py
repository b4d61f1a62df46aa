"""Helpers for the chapter notebooks: ``chapters`` (measurements and claims), ``workloads``,
``compile_child`` (a compile in a fresh process), ``notebooks`` (the committed notebooks) and
``colab`` (the Colab setup cell). Imports checks only.
"""
