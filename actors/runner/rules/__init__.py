"""The Runner's rules: its registry of sessions as a state machine returning actions,
supervision as values, and the member table of several hosts. Pure."""
