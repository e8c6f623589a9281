"""Pydantic request and response models of the API. Requests refuse unknown fields and bound every size."""
