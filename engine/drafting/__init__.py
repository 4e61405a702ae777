"""Drafting: one module per kind of drafter behind the drafter interface (base), the draft policy that
chooses how long a draft to ask for (policy) and the cost model it prices with (costs).
"""
