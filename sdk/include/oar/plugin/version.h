/* Oar plugin ABI — version numbers and the versioning policy.
 *
 * MAJOR changes only when an existing field, slot or value changes meaning, moves or disappears. The host
 * refuses a plugin whose major differs from its own, and says so naming both versions.
 * MINOR grows when something is appended: a slot at the end of a function table, a field at the end of a
 * struct, a new enumerator value, a new optional sub-interface. Every minor is one line in
 * sdk/CHANGELOG.md. Host and plugin may differ in minor in either direction: each side reads
 * `struct_size` and never touches a slot or field beyond it.
 */
#ifndef OAR_PLUGIN_VERSION_H_
#define OAR_PLUGIN_VERSION_H_

#define OAR_PLUGIN_ABI_MAJOR 1
#define OAR_PLUGIN_ABI_MINOR 1

#endif /* OAR_PLUGIN_VERSION_H_ */
