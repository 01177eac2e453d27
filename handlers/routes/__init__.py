"""HTTP routes that are not Bolt listeners: the aiohttp app and its gate (``http``), external results
(``results``: ``POST /hitl/requests/<id>/result``) and the OAuth install flow's settings (``oauth``).
"""
