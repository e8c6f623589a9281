"""View models: each page's data, gathered from the services and shaped for its template.

Views take a session and return plain dataclasses/dicts; they never render and never write.
"""
