{{ config(materialized='stable_view') }}
{#- Hours and episodes per task, source kind, device, demonstrator and split. A view:
    one aggregate scan of `episodes` per query (tens of ms at 1M episodes, see
    docs/catalog.md), so a build costs nothing and the figures are never behind. -#}
select
  coalesce(task, '(none)') as task,
  source_kind,
  coalesce(device, '(none)') as device,
  coalesce(demonstrator, '(none)') as demonstrator,
  coalesce(split, '(none)') as split,
  count(*) as episodes,
  coalesce(sum(duration_s), 0) / 3600.0 as hours,
  count_if(usable) as usable_episodes,
  coalesce(sum(duration_s) filter (where usable), 0) / 3600.0 as usable_hours,
  count_if(gate = 'blocked') as blocked_episodes,
  count_if(waived) as waived_episodes,
  count_if(quality_status = 'fail') as fail_episodes
from {{ ref('episodes') }}
group by all
