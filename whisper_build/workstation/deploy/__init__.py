"""``make deploy`` / ``make destroy``: the whole AWS journey of one config (:mod:`.plan`, :mod:`.aws`, :mod:`.cli`)."""
