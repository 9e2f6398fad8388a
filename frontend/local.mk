# frontend: filled in by the frontend work
