"""Which transport a handle uses when nobody chose one (kept for imports).

The decision is made in one place for services, pools and runners alike:
[`easycore.common.parallel.defaults`][easycore.common.parallel.defaults].
"""

from ..defaults import default_transport, register_default_transport

__all__ = ["default_transport", "register_default_transport"]
