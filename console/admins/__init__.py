"""The console's tables other than the instances, one module per heading the site lists them under
(``console/site.py``): ``work``, ``records`` (Engine records), ``audit`` and ``access``, on the shared ``base``.
``console/admin.py``, the module Django's autodiscovery imports, imports each of them."""
