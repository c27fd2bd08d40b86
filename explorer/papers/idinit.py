"""IDInit (002_809eeb49ab17820c.txt): identity-control initialisation, checked on runs at CPU scale."""

PRESETS: dict = {}
