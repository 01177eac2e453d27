"""What the frontend's rooms stand on: the parts the composition root hands the listeners (``deps``), Slack's
word on people and admins (``admins``) and the approver lists' side of governance (``governance``).

handlers/ has three rooms above this one, each importing only the rooms below it: ``routes/`` (plain HTTP)
over the listeners (``handlers/*.py``) over ``delivery/`` (the outbound frontend) over ``shared/``. Nothing
here imports a listener, a route or a delivery module (tests/test_house_rules.py).
"""
