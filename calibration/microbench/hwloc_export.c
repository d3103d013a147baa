/* Writes this machine's hwloc topology as XML on stdout, with PCI and OS devices, like
 * `lstopo --of xml -`: for nodes where hwloc's library is installed but not its lstopo
 * tool (e.g. Ubuntu's libhwloc-dev without hwloc-nox). Uses hwloc's public API only
 * (hwloc/helper.h, hwloc/export.h of hwloc 2.x). */
#include <hwloc.h>
#include <stdio.h>

int main(void)
{
	hwloc_topology_t topo;
	if (hwloc_topology_init(&topo) != 0)
		return 1;
	/* lstopo keeps the I/O objects it shows by default (GPUs, NICs) */
	hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (hwloc_topology_load(topo) != 0) {
		fprintf(stderr, "error: hwloc: topology: expected a loadable topology of this machine\n");
		return 1;
	}
	int ret = hwloc_topology_export_xml(topo, "-", 0);
	hwloc_topology_destroy(topo);
	return ret == 0 ? 0 : 1;
}
