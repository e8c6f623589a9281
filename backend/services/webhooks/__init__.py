"""Webhooks: admins' subscriptions (:mod:`.subscriptions`), the durable outbox events are written to
(:mod:`.outbox`), the regressions watch that turns new verdicts into events (:mod:`.watch`), target
checks (:mod:`.targets`), delivery with leases and backoff (:mod:`.delivery`) and the supervised
worker thread of the API process (:mod:`.worker`). docs/ci.md describes what a receiver gets."""
