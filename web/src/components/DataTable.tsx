// Tables: TanStack Table for columns and sorting, TanStack Virtual for long lists (only the rows
// in view are in the DOM, so ten thousand decisions scroll as smoothly as ten).
import { useRef, useState, type ReactNode } from "react";
import {
  flexRender,
  getCoreRowModel,
  getSortedRowModel,
  useReactTable,
  type ColumnDef,
  type SortingState,
} from "@tanstack/react-table";
import { useVirtualizer } from "@tanstack/react-virtual";

/**
 * A column of any value type. TanStack Table has no common type for columns whose values differ
 * (`ColumnDef<T, unknown>` refuses a cell that reads a string: the value is both read and returned),
 * so its documented escape hatch is `any`; it is confined to this alias.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- see above: the library's own idiom for mixed columns.
export type Column<T> = ColumnDef<T, any>;

const ROW_PX = 37;
/** Below this many rows every row is rendered; above, only those in view. */
const VIRTUAL_AFTER = 150;

export function DataTable<T>({
  data,
  columns,
  label,
  testId,
  empty = "None yet.",
  rowKey,
  onRowClick,
  maxHeight = 560,
}: {
  data: T[];
  columns: Column<T>[];
  label: string;
  testId?: string;
  empty?: ReactNode;
  rowKey: (row: T) => string;
  onRowClick?: (row: T) => void;
  maxHeight?: number;
}) {
  const [sorting, setSorting] = useState<SortingState>([]);
  // TanStack Table's instance returns new rows from the same functions, which the React Compiler
  // cannot memoize; the app is not compiled by it, so the compiler skipping this component is moot.
  // eslint-disable-next-line react-hooks/incompatible-library -- see above
  const table = useReactTable({
    data,
    columns,
    state: { sorting },
    onSortingChange: setSorting,
    getCoreRowModel: getCoreRowModel(),
    getSortedRowModel: getSortedRowModel(),
    getRowId: (row) => rowKey(row),
  });
  const rows = table.getRowModel().rows;
  const scroller = useRef<HTMLDivElement>(null);
  const virtual = rows.length > VIRTUAL_AFTER;
  const virtualizer = useVirtualizer({
    count: rows.length,
    getScrollElement: () => scroller.current,
    estimateSize: () => ROW_PX,
    overscan: 12,
    enabled: virtual,
  });
  const items = virtual ? virtualizer.getVirtualItems() : null;
  const shown = items ? items.map((i) => rows[i.index]!) : rows;
  const padTop = items && items.length ? items[0]!.start : 0;
  const padBottom = items && items.length ? virtualizer.getTotalSize() - items[items.length - 1]!.end : 0;
  const colCount = table.getVisibleLeafColumns().length;

  return (
    <div className="table-scroll" ref={scroller} style={{ maxHeight }} tabIndex={0} role="region" aria-label={label}>
      <table data-testid={testId}>
        <thead>
          {table.getHeaderGroups().map((hg) => (
            <tr key={hg.id}>
              {hg.headers.map((h) => {
                const sorted = h.column.getIsSorted();
                const sortable = h.column.getCanSort();
                return (
                  <th key={h.id} scope="col" aria-sort={sorted === "asc" ? "ascending" : sorted === "desc" ? "descending" : undefined}>
                    {sortable ? (
                      <button type="button" className="sort" onClick={h.column.getToggleSortingHandler()}>
                        {flexRender(h.column.columnDef.header, h.getContext())}
                        <span aria-hidden="true">{sorted === "asc" ? " ▲" : sorted === "desc" ? " ▼" : ""}</span>
                      </button>
                    ) : (
                      flexRender(h.column.columnDef.header, h.getContext())
                    )}
                  </th>
                );
              })}
            </tr>
          ))}
        </thead>
        <tbody>
          {rows.length === 0 && (
            <tr>
              <td colSpan={colCount} className="empty">
                {empty}
              </td>
            </tr>
          )}
          {padTop > 0 && <tr aria-hidden="true" style={{ height: padTop }} />}
          {shown.map((row) => (
            <tr
              key={row.id}
              data-row={row.id}
              className={onRowClick ? "clickable" : undefined}
              onClick={onRowClick ? () => onRowClick(row.original) : undefined}
            >
              {row.getVisibleCells().map((cell) => (
                <td key={cell.id} data-col={cell.column.id}>
                  {flexRender(cell.column.columnDef.cell, cell.getContext())}
                </td>
              ))}
            </tr>
          ))}
          {padBottom > 0 && <tr aria-hidden="true" style={{ height: padBottom }} />}
        </tbody>
      </table>
    </div>
  );
}
