//! The overlay generator (ScalaCN Fig. 1, §4.1): K subnets × C containers
//! become K masks of distinct shapes in each of the local and remote
//! tables, C entries each, none of them in the lab traffic's way.

use std::collections::BTreeSet;

fn plan(subnets: u32, containers: u32) -> wirelab_plan::Plan {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../specs/scalacn/write-across-an-overlay-of-100-subnets.yaml"),
    )
    .unwrap();
    let text = text.replace(
        "overlay: {subnets: 100, containers: 8, local: 0, remote: 1}",
        &format!("overlay: {{subnets: {subnets}, containers: {containers}}}"),
    );
    let spec = wirelab_spec::parse(&text, wirelab_analyze::catalog()).unwrap();
    wirelab_plan::plan(&spec, "0a1b2c", 1).unwrap()
}

#[test]
fn an_overlay_is_k_distinct_masks_of_c_entries_in_each_table() {
    for k in [0, 1, 100, 255] {
        let p = plan(k, 3);
        let es = p.flowtables.as_ref().unwrap();
        for (t, table) in es.tables.iter().enumerate() {
            assert_eq!(table.len(), k as usize + 1, "table {t}, {k} subnets");
            let generated = &table[..k as usize];
            assert!(generated
                .iter()
                .all(|m| m.generated && m.entries.len() == 3));
            // Distinct shapes: each subnet a flow group of its own.
            let shapes: BTreeSet<String> = generated
                .iter()
                .map(|m| format!("{:?}", m.fields))
                .collect();
            assert_eq!(shapes.len(), k as usize, "table {t}");
            assert!(!table[k as usize].generated, "the spec's own mask is last");
        }
        // Local entries encapsulate with their subnet's VNI and search the
        // remote table; remote ones decapsulate by that VNI.
        for (k, (local, remote)) in es.tables[0]
            .iter()
            .zip(&es.tables[1])
            .enumerate()
            .take(k as usize)
        {
            let vni = wirelab_spec::flowtables::Overlay::vni(k as u32);
            assert!(local.entries.iter().all(|e| matches!(
                e.action,
                wirelab_plan::EsActionPlan::Encap { vni: v, next: wirelab_plan::EsNext::Table(1), .. } if v == vni
            )));
            assert!(remote.entries.iter().all(|e| e.vni == Some(vni)
                && matches!(e.action, wirelab_plan::EsActionPlan::Decap { .. })));
        }
        // ScalaCN §4.1 (a): the lab's own traffic still gets through.
        assert_eq!(wirelab_plan::reach::undelivered(&p), Vec::<String>::new());
    }
}
