"""Notifications: events that need a person, sent to server.yaml's sinks (webhooks, Slack) by plugins.

- `events`: the kinds of event and how each is said (`model_parked`, `node_lost`, ...);
- `notifier`: the queue and the background task that deliver them, de-duplicated;
- `wiring`: putting the notifier into `llmgw server`.

See docs/notifications.md.
"""
