"""Adapters that bring other simulators behind the jaxrl environment contract.

* :mod:`jaxrl.adapters.brax` — every Brax environment as ``brax/<name>`` (needs the
  ``[physics]`` extra).
* :mod:`jaxrl.adapters.playground` — MuJoCo Playground's DM Control Suite as
  ``playground/<Name>`` (needs the ``[playground]`` extra).
* :mod:`jaxrl.adapters.mjx` — a physics env from a MuJoCo XML model plus pure
  ``observation`` / ``reward`` / ``terminated`` functions, stepped by ``mujoco-mjx``.
* :mod:`jaxrl.adapters.gymnax` — gymnax's suite as ``gymnax/<id>`` (the ``[gymnax]`` extra).
* :mod:`jaxrl.adapters.jumanji` — Jumanji's suite as ``jumanji/<id>`` (the ``[jumanji]`` extra).
* :mod:`jaxrl.adapters.craftax` — Craftax and Craftax-Classic as ``craftax/<id>``, through
  the gymnax adapter (``[craftax]`` extra).

No module imports its simulator at ``import jaxrl`` time.
"""
