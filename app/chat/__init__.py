"""The conversation view and what sits around it: input, legend."""
