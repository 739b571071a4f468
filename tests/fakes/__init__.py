"""Test doubles that enforce the contracts of libraries this machine cannot run (vLLM needs a GPU)."""
